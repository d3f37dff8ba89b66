"""The pure core of agent/metrics: Jolokia bulk answers parsed, records built (schema v1),
rates from counters. Jolokia answers are shaped as Jolokia 2.6.0
answered a real Kafka 3.9 broker."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agent.metrics.jmx import (
    JMX_READS,
    JmxResult,
    bulk_request,
    object_name_properties,
    parse_bulk_response,
)
from agent.metrics.record import (
    SCHEMA_VERSION,
    Baseline,
    BrokerIdentity,
    HostReading,
    MetricsSample,
    ReadError,
    as_count,
    as_rate,
    build_record,
    counter_rate,
    cpu_percent,
)

pytestmark = pytest.mark.unit

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "analytics/schemas/metrics-v1.schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
READS = {read.key: read for read in JMX_READS}
IDENTITY = BrokerIdentity("prod", 2, "zone-c", "0.1.0")
HOST = HostReading(
    cpu_busy_s=250.0,
    cpu_total_s=1000.0,
    memory_used_bytes=3_000,
    memory_total_bytes=8_000,
    log_dir_used_bytes=500,
    log_dir_free_bytes=1500,
    network_bytes_sent=77,
    network_bytes_recv=88,
)
BTM = "kafka.server:type=BrokerTopicMetrics"


def meter(count: float, one_minute: float = 0.5) -> dict[str, Any]:
    return {"Count": count, "OneMinuteRate": one_minute}


def healthy_values(**changes: Any) -> dict[str, Any]:
    """The `value` of every read's response, by read key, for a broker leading orders-0."""
    values: dict[str, Any] = {
        "under_replicated_partitions": {"Value": 0},
        "offline_partitions_count": {"Value": 0},
        "active_controller_count": {"Value": 1},
        "isr_shrinks": meter(4, 0.0),
        "isr_expands": meter(6, 0.0),
        "bytes_in": {
            f"{BTM},name=BytesInPerSec": meter(10_000, 100.0),
            f"{BTM},name=BytesInPerSec,topic=orders": meter(6_000, 60.0),
            f"{BTM},name=BytesInPerSec,topic=audit.log": meter(4_000, 40.0),
        },
        "bytes_out": {
            f"{BTM},name=BytesOutPerSec": meter(3_000, 30.0),
            f"{BTM},name=BytesOutPerSec,topic=orders": meter(3_000, 30.0),
        },
        "messages_in": {
            f"{BTM},name=MessagesInPerSec": meter(100, 1.0),
            f"{BTM},name=MessagesInPerSec,topic=orders": meter(60, 0.6),
            f"{BTM},name=MessagesInPerSec,topic=audit.log": meter(40, 0.4),
        },
        "replication_bytes_in": meter(2_000, 20.0),
        "replication_bytes_out": meter(1_000, 10.0),
        "request_handler_idle": {
            "Count": 100_000_000_000,
            "OneMinuteRate": 0.93,
            "RateUnit": "NANOSECONDS",
        },
        "network_processor_idle": {"Value": 0.97},
        "leader_count": {"Value": 1},
        "partition_count": {"Value": 2},
        "under_min_isr_partition_count": {"Value": 0},
        "offline_log_directory_count": {"Value": 0},
        "produce_time_p99": {"99thPercentile": 12.5},
        "fetch_consumer_time_p99": {"99thPercentile": 501.0},
        "log_size": {
            "kafka.log:type=Log,name=Size,topic=orders,partition=0": {"Value": 700},
            "kafka.log:type=Log,name=Size,topic=orders,partition=1": {"Value": 300},
        },
        "log_end_offset": {
            "kafka.log:type=Log,name=LogEndOffset,topic=orders,partition=0": {"Value": 70},
            "kafka.log:type=Log,name=LogEndOffset,topic=orders,partition=1": {"Value": 30},
        },
        "replicas_count": {
            "kafka.cluster:type=Partition,name=ReplicasCount,topic=orders,partition=0": {
                "Value": 3
            },
            "kafka.cluster:type=Partition,name=ReplicasCount,topic=orders,partition=1": {
                "Value": 0
            },
        },
        "log_cleaner_time_since_last_run": {"Value": 12_000},
    }
    values.update(changes)
    return values


def ok(key: str, value: Any) -> dict[str, Any]:
    return {"request": READS[key].request(), "value": value, "status": 200, "timestamp": 1}


def not_found(key: str, error: str = "") -> dict[str, Any]:
    return {
        "request": READS[key].request(),
        "error_type": "javax.management.InstanceNotFoundException",
        "error": error or READS[key].mbean,
        "status": 404,
    }


def answer(values: dict[str, Any], **responses: dict[str, Any]) -> list[dict[str, Any]]:
    """A Jolokia bulk answer: `ok` for every read, except the responses given by key."""
    return [responses.get(read.key) or ok(read.key, values[read.key]) for read in JMX_READS]


def build(
    body: object,
    host: HostReading = HOST,
    previous: Baseline | None = None,
    at_s: float = 100.0,
) -> MetricsSample:
    built = build_record(
        IDENTITY,
        parse_bulk_response(JMX_READS, body),
        host,
        previous=previous,
        at_s=at_s,
        timestamp_ms=1_767_225_600_000,
        interval_s=30.0,
    )
    jsonschema.validate(built.record, SCHEMA)  # every record any test builds is schema v1
    return MetricsSample(built.record, built.errors)


def first_and_baseline(body: object) -> tuple[MetricsSample, Baseline]:
    built = build_record(
        IDENTITY,
        parse_bulk_response(JMX_READS, body),
        HOST,
        previous=None,
        at_s=100.0,
        timestamp_ms=1_767_225_600_000,
        interval_s=30.0,
    )
    return MetricsSample(built.record, built.errors), built.baseline


# -- the bulk request and Jolokia's answer ---------------------------------------------------


def test_one_bulk_request_reads_every_mbean_with_wildcards_for_topics_and_partitions() -> None:
    body = bulk_request(JMX_READS)
    assert all(r["type"] == "read" and isinstance(r["attribute"], list) for r in body)
    mbeans = [r["mbean"] for r in body]
    assert f"{BTM},name=BytesInPerSec,*" in mbeans
    assert "kafka.log:type=Log,name=Size,*" in mbeans
    assert len(set(mbeans)) == len(mbeans) == len(JMX_READS)


def test_exact_and_pattern_answers_are_parsed_into_mbean_values() -> None:
    result = parse_bulk_response(JMX_READS, answer(healthy_values()))
    assert result.failures == {}
    assert result.unreachable is None
    urp = READS["under_replicated_partitions"].mbean
    assert result.values["under_replicated_partitions"] == {urp: {"Value": 0}}
    assert len(result.values["log_size"]) == 2


@pytest.mark.parametrize(
    ("key", "response", "expected_values", "failure_contains"),
    [
        ("log_size", not_found("log_size", "No MBean with pattern found"), {}, None),
        (
            "under_replicated_partitions",
            not_found("under_replicated_partitions"),
            None,
            "status 404 InstanceNotFoundException",
        ),
        (
            "leader_count",
            {"status": 500, "error_type": "java.lang.OutOfMemoryError", "error": "heap"},
            None,
            "status 500 OutOfMemoryError: heap",
        ),
        ("leader_count", {"status": 200, "value": 5}, None, "expected attribute values"),
        ("log_size", {"status": 200, "value": {"x:type=Log": 5}}, None, "an object per"),
        ("leader_count", "garbage", None, "not a response object"),
    ],
    ids=["empty-pattern", "missing-mbean", "server-error", "bare-value", "bad-pattern", "junk"],
)
def test_one_read_answer(
    key: str, response: object, expected_values: object, failure_contains: str | None
) -> None:
    body: list[object] = list(answer(healthy_values()))
    body[list(READS).index(key)] = response
    result = parse_bulk_response(JMX_READS, body)
    assert result.values.get(key) == expected_values
    if failure_contains is None:
        assert key not in result.failures
    else:
        assert failure_contains in result.failures[key]
        assert set(result.failures) == {key}


@pytest.mark.parametrize(
    ("body", "reason"),
    [({"error": "x"}, "not a list"), ([], "0 responses to a bulk read of")],
)
def test_an_answer_that_is_not_a_bulk_answer_fails_the_whole_read(
    body: object, reason: str
) -> None:
    result = parse_bulk_response(JMX_READS, body)
    assert result.values == {}
    assert result.unreachable is not None and reason in result.unreachable


@pytest.mark.parametrize(
    ("name", "properties"),
    [
        (
            "kafka.log:type=Log,name=Size,topic=a.b,partition=3",
            {"type": "Log", "name": "Size", "topic": "a.b", "partition": "3"},
        ),
        ('kafka.server:type=X,topic="q"', {"type": "X", "topic": "q"}),
        ("kafka.server", {}),
    ],
)
def test_object_name_properties(name: str, properties: dict[str, str]) -> None:
    assert object_name_properties(name) == properties


# -- the record ---------------------------------------------------------------------------------


def test_a_healthy_first_collect_fills_every_field_from_one_minute_rates() -> None:
    sample = build(answer(healthy_values()))
    record = sample.record
    assert sample.errors == ()
    assert record["errors"] == []
    assert (record["schema_version"], record["cluster"], record["broker_id"]) == (1, "prod", 2)
    assert (record["rack"], record["agent_version"], record["interval_s"]) == (
        "zone-c",
        "0.1.0",
        30.0,
    )
    assert record["broker"] == {
        "under_replicated_partitions": 0,
        "offline_partitions_count": 0,
        "active_controller_count": 1,
        "isr_shrinks_per_s": 0.0,
        "isr_expands_per_s": 0.0,
        "bytes_in_per_s": 100.0,
        "bytes_out_per_s": 30.0,
        "replication_bytes_in_per_s": 20.0,
        "replication_bytes_out_per_s": 10.0,
        "messages_in_per_s": 1.0,
        "request_handler_avg_idle_percent": 0.93,
        "network_processor_avg_idle_percent": 0.97,
        "leader_count": 1,
        "partition_count": 2,
        "log_size_bytes": 1000,
        "log_cleaner_time_since_last_run_ms": 12_000,
        "under_min_isr_partition_count": 0,
        "offline_log_directory_count": 0,
        "produce_total_time_ms_p99": 12.5,
        "fetch_consumer_total_time_ms_p99": 501.0,
    }
    assert record["topics"] == [
        # a topic nobody fetched from has no BytesOutPerSec MBean yet: nothing went out
        {
            "topic": "audit.log",
            "bytes_in_per_s": 40.0,
            "bytes_out_per_s": 0.0,
            "messages_in_per_s": 0.4,
        },
        {
            "topic": "orders",
            "bytes_in_per_s": 60.0,
            "bytes_out_per_s": 30.0,
            "messages_in_per_s": 0.6,
        },
    ]
    assert record["partitions"] == [
        {
            "topic": "orders",
            "partition": 0,
            "leader": True,
            "size_bytes": 700,
            "log_end_offset": 70,
        },
        {
            "topic": "orders",
            "partition": 1,
            "leader": False,
            "size_bytes": 300,
            "log_end_offset": 30,
        },
    ]
    assert record["host"] == {
        "cpu_percent": 25.0,
        "memory_used_bytes": 3_000,
        "memory_total_bytes": 8_000,
        "log_dir_used_bytes": 500,
        "log_dir_free_bytes": 1500,
        "log_dir_free_percent": 75.0,
        "network_bytes_sent": 77,
        "network_bytes_recv": 88,
    }
    assert sample.sentence() is None
    assert sample.jmx_answered
    assert sample.key == b"2"


def test_the_record_has_every_field_of_the_published_schema_and_no_other() -> None:
    record = build(answer(healthy_values())).record
    properties = SCHEMA["properties"]
    assert set(record) == set(properties)
    assert list(record["broker"]) == list(properties["broker"]["properties"])
    assert list(record["host"]) == list(properties["host"]["properties"])
    assert list(record["topics"][0]) == list(properties["topics"]["items"]["properties"])
    assert list(record["partitions"][0]) == list(properties["partitions"]["items"]["properties"])
    assert record["schema_version"] == SCHEMA_VERSION == properties["schema_version"]["const"]


def test_the_second_collect_averages_rates_over_its_interval_from_counter_deltas() -> None:
    _, baseline = first_and_baseline(answer(healthy_values()))
    later = healthy_values(
        bytes_in={
            f"{BTM},name=BytesInPerSec": meter(10_000 + 3_000),  # +3000 bytes in 10 s
            f"{BTM},name=BytesInPerSec,topic=orders": meter(6_000 + 1_000),
            f"{BTM},name=BytesInPerSec,topic=new-topic": meter(2_000, 7.5),
        },
        request_handler_idle=meter(100_000_000_000 + 8_000_000_000, 0.5),  # 8 s idle of 10
    )
    sample = build(answer(later), previous=baseline, at_s=110.0, host=HOST)
    record = sample.record
    assert record["interval_s"] == 10.0
    assert record["broker"]["bytes_in_per_s"] == 300.0
    assert record["broker"]["request_handler_avg_idle_percent"] == pytest.approx(0.8)
    rates = {t["topic"]: t["bytes_in_per_s"] for t in record["topics"]}
    # orders: its counter's delta; new-topic: no earlier counter, the meter's own rate
    assert rates == {"orders": 100.0, "new-topic": 7.5, "audit.log": 0.0}
    assert record["broker"]["isr_shrinks_per_s"] == 0.0  # counter unchanged


def test_a_counter_that_went_backwards_means_a_broker_restart_and_the_meter_rate_is_used() -> None:
    _, baseline = first_and_baseline(answer(healthy_values()))
    restarted = healthy_values(replication_bytes_in=meter(50, 2.5))
    record = build(answer(restarted), previous=baseline, at_s=110.0).record
    assert record["broker"]["replication_bytes_in_per_s"] == 2.5


def test_only_this_collects_counters_are_kept_for_the_next() -> None:
    _, baseline = first_and_baseline(answer(healthy_values()))
    assert baseline.counters["bytes_in"] == 10_000
    assert baseline.counters["bytes_in|orders"] == 6_000
    failed = answer(healthy_values(), bytes_in={"status": 500, "error": "boom"})
    built = build_record(
        IDENTITY,
        parse_bulk_response(JMX_READS, failed),
        HOST,
        previous=baseline,
        at_s=110.0,
        timestamp_ms=1,
        interval_s=30.0,
    )
    assert "bytes_in" not in built.baseline.counters
    assert "bytes_in|orders" not in built.baseline.counters
    assert built.baseline.at_s == 110.0


def test_jolokia_unreachable_gives_nulls_one_error_and_a_sentence() -> None:
    built = build_record(
        IDENTITY,
        JmxResult.failed(
            "Jolokia at http://10.0.0.1:8778/jolokia/ unreachable: connection refused"
        ),
        HOST,
        previous=None,
        at_s=1.0,
        timestamp_ms=1,
        interval_s=30.0,
    )
    jsonschema.validate(built.record, SCHEMA)
    sample = MetricsSample(built.record, built.errors)
    assert set(built.record["broker"].values()) == {None}
    assert built.record["topics"] == [] and built.record["partitions"] == []
    assert built.record["host"]["memory_used_bytes"] == 3_000  # psutil still measured
    assert built.record["errors"] == [
        {
            "source": "jmx",
            "metric": None,
            "message": "Jolokia at http://10.0.0.1:8778/jolokia/ unreachable: connection refused",
        }
    ]
    assert not sample.jmx_answered
    assert sample.sentence() == (
        "metrics: 1 jmx read failed (all: Jolokia at http://10.0.0.1:8778/jolokia/"
        " unreachable: connection refused)"
    )


@pytest.mark.parametrize(
    ("failed_read", "null_fields", "error_metric"),
    [
        (
            "under_replicated_partitions",
            {"broker.under_replicated_partitions"},
            "broker.under_replicated_partitions",
        ),
        (
            "bytes_out",
            {"broker.bytes_out_per_s", "topics.bytes_out_per_s"},
            "broker.bytes_out_per_s, topics[].bytes_out_per_s",
        ),
        (
            "log_size",
            {"broker.log_size_bytes", "partitions.size_bytes"},
            "partitions[].size_bytes, broker.log_size_bytes",
        ),
        ("replicas_count", {"partitions.leader"}, "partitions[].leader"),
        (
            "request_handler_idle",
            {"broker.request_handler_avg_idle_percent"},
            "broker.request_handler_avg_idle_percent",
        ),
    ],
)
def test_one_failed_read_nulls_exactly_what_it_fills(
    failed_read: str, null_fields: set[str], error_metric: str
) -> None:
    failure = {"status": 500, "error_type": "java.lang.RuntimeException", "error": "boom"}
    sample = build(answer(healthy_values(), **{failed_read: failure}))
    record = sample.record
    nulls = {f"broker.{k}" for k, v in record["broker"].items() if v is None}
    for section in ("topics", "partitions"):
        nulls |= {
            f"{section}.{k}" for entry in record[section] for k, v in entry.items() if v is None
        }
    assert nulls == null_fields
    assert [(e.source, e.metric) for e in sample.errors] == [("jmx", error_metric)]
    assert "boom" in sample.errors[0].message
    assert sample.jmx_answered
    sentence = sample.sentence()
    assert sentence is not None and sentence.startswith("metrics: 1 jmx read failed")


@pytest.mark.parametrize(
    ("read", "value", "field"),
    [
        ("leader_count", {"Value": -1}, "leader_count"),
        ("leader_count", {"Value": 1.5}, "leader_count"),
        ("leader_count", {"Value": "7"}, "leader_count"),
        ("active_controller_count", {"Value": True}, "active_controller_count"),
        ("network_processor_idle", {"Value": None}, "network_processor_avg_idle_percent"),
        ("isr_shrinks", {"Count": math.nan, "OneMinuteRate": math.inf}, "isr_shrinks_per_s"),
    ],
)
def test_a_value_of_the_wrong_kind_becomes_null_and_an_error(
    read: str, value: Any, field: str
) -> None:
    sample = build(answer(healthy_values(**{read: value})))
    assert sample.record["broker"][field] is None
    assert len(sample.errors) == 1
    assert "unexpected value" in sample.errors[0].message
    sample.to_json_bytes()  # no NaN or infinity reached the record (allow_nan=False)


def test_idle_fractions_are_clamped_to_the_schemas_range() -> None:
    record = build(answer(healthy_values(network_processor_idle={"Value": 1.02}))).record
    assert record["broker"]["network_processor_avg_idle_percent"] == 1.0


def test_a_future_log_of_a_replica_moving_between_log_dirs_is_not_another_replica() -> None:
    sizes = dict(healthy_values()["log_size"])
    sizes["kafka.log:type=Log,name=Size,topic=orders,partition=0,is-future=true"] = {"Value": 5}
    record = build(answer(healthy_values(log_size=sizes))).record
    assert [p["size_bytes"] for p in record["partitions"]] == [700, 300]
    assert record["broker"]["log_size_bytes"] == 1000


def test_a_broker_without_partitions_reports_empty_lists_and_zero_size() -> None:
    body = answer(
        healthy_values(),
        log_size=not_found("log_size"),
        log_end_offset=not_found("log_end_offset"),
        replicas_count=not_found("replicas_count"),
    )
    sample = build(body)
    assert sample.errors == ()
    assert sample.record["partitions"] == []
    assert sample.record["broker"]["log_size_bytes"] == 0


def test_host_read_errors_join_the_records_errors() -> None:
    error = ReadError(
        "psutil", "host.log_dir_used_bytes, host.log_dir_free_bytes", "disk_usage: gone"
    )
    host = HostReading(cpu_busy_s=1.0, cpu_total_s=4.0, errors=(error,))
    sample = build(answer(healthy_values()), host=host)
    assert sample.record["host"]["log_dir_used_bytes"] is None
    assert sample.record["host"]["cpu_percent"] == 25.0
    assert sample.record["errors"] == [error.to_json()]
    assert sample.sentence() == (
        "metrics: 1 psutil read failed (host.log_dir_used_bytes, host.log_dir_free_bytes:"
        " disk_usage: gone)"
    )


# -- small pure functions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "one_minute", "previous", "elapsed", "scale", "expected"),
    [
        (1300.0, 5.0, 1000.0, 10.0, 1.0, 30.0),  # delta over the interval
        (1000.0, 5.0, 1000.0, 10.0, 1.0, 0.0),  # no events
        (50.0, 5.0, 1000.0, 10.0, 1.0, 5.0),  # went backwards: restarted, meter rate
        (1300.0, 5.0, None, None, 1.0, 5.0),  # first reading
        (1300.0, 5.0, 1000.0, 0.0, 1.0, 5.0),  # no time passed
        (None, 5.0, 1000.0, 10.0, 1.0, 5.0),  # no counter
        (9e9, 0.5, 0.0, 10.0, 1e-9, 0.9),  # idle nanoseconds -> fraction
        (None, None, None, None, 1.0, None),
    ],
)
def test_counter_rate(
    count: float | None,
    one_minute: float | None,
    previous: float | None,
    elapsed: float | None,
    scale: float,
    expected: float | None,
) -> None:
    assert counter_rate(count, one_minute, previous, elapsed, scale) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("busy", "total", "previous_busy", "previous_total", "expected"),
    [
        (300.0, 1000.0, None, None, 30.0),  # since boot
        (300.0, 1000.0, 200.0, 900.0, 100.0),  # all busy since the previous reading
        (300.0, 1000.0, 250.0, 800.0, 25.0),
        (300.0, 1000.0, 300.0, 1000.0, 30.0),  # no time passed: since boot
        (None, 1000.0, None, None, None),
        (0.0, 0.0, None, None, None),
    ],
)
def test_cpu_percent(
    busy: float | None,
    total: float | None,
    previous_busy: float | None,
    previous_total: float | None,
    expected: float | None,
) -> None:
    assert cpu_percent(busy, total, previous_busy, previous_total) == expected


@pytest.mark.parametrize(
    ("value", "count", "rate"),
    [
        (3, 3, 3.0),
        (3.0, 3, 3.0),
        (2.5, None, 2.5),
        (-1, None, None),
        (True, None, None),
        ("3", None, None),
        (None, None, None),
        (math.nan, None, None),
        (math.inf, None, None),
    ],
)
def test_value_checks(value: object, count: int | None, rate: float | None) -> None:
    assert as_count(value) == count
    assert as_rate(value) == rate
