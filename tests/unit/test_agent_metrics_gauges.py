"""statsd gauges of a metrics record: names, values, what is left out."""

from __future__ import annotations

import pytest

from agent.metrics.gauges import segment, statsd_gauges
from tests.unit.test_agent_metrics_record import answer, build, healthy_values

pytestmark = pytest.mark.unit


def test_statsd_gauges_name_broker_host_and_topic_values_and_skip_nulls() -> None:
    body = answer(healthy_values(), leader_count={"status": 500, "error": "x"})
    record = build(body).record
    gauges = dict(statsd_gauges(record))
    assert gauges["prod.brokers.2.bytes_in_per_s"] == 100.0
    assert gauges["prod.brokers.2.host.cpu_percent"] == 25.0
    assert gauges["prod.brokers.2.topics.audit_log.bytes_in_per_s"] == 40.0
    assert gauges["prod.brokers.2.read_errors"] == 1.0
    assert "prod.brokers.2.leader_count" not in gauges  # null: nothing sent
    # per-partition values go to Kafka only
    base = "prod.brokers.2"
    topic_fields = ("bytes_in_per_s", "bytes_out_per_s", "messages_in_per_s")
    assert set(gauges) == (
        {f"{base}.{name}" for name in record["broker"] if name != "leader_count"}
        | {f"{base}.host.{name}" for name in record["host"]}
        | {f"{base}.topics.{t}.{name}" for t in ("orders", "audit_log") for name in topic_fields}
        | {f"{base}.read_errors"}
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("orders", "orders"), ("audit.log", "audit_log"), ("a:b|c@d", "a_b_c_d"), ("", "_")],
)
def test_a_gauge_name_segment_has_no_separator_of_graphite_or_statsd(
    text: str, expected: str
) -> None:
    assert segment(text) == expected
