"""The thin adapters of agent/metrics against in-process endpoints (no processes started):
the Jolokia HTTP call and its failures, psutil, the collector's interval bookkeeping, and
statsd gauges over a real UDP socket."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonschema
import pytest

from agent.metrics import MetricsCollector, MetricsPublisher
from agent.metrics.host import read_host
from agent.metrics.jmx import JMX_READS, JmxResult, merge_results, split_reads
from agent.metrics.jolokia import JolokiaBulkReader
from agent.metrics.record import HostReading, MetricsSample
from tests.unit.test_agent_metrics_record import SCHEMA, answer, build, healthy_values, ok

pytestmark = pytest.mark.unit

Reply = Callable[[bytes], tuple[int, bytes]]
"""Request body -> (HTTP status, response body)."""


@pytest.fixture
def fake_jolokia() -> Iterator[Callable[[Reply], str]]:
    """Start an HTTP server on 127.0.0.1 answering POSTs with a given function; its URL."""
    servers: list[ThreadingHTTPServer] = []

    def start(reply: Reply) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                status, body = reply(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}/jolokia/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def healthy_reply(request: bytes) -> tuple[int, bytes]:
    requests = json.loads(request)
    assert [r["mbean"] for r in requests] == [read.mbean for read in JMX_READS]
    return 200, json.dumps(answer(healthy_values())).encode()


# -- Jolokia ------------------------------------------------------------------------------------


def test_one_post_reads_every_mbean(fake_jolokia: Callable[[Reply], str]) -> None:
    posts: list[bytes] = []

    def reply(request: bytes) -> tuple[int, bytes]:
        posts.append(request)
        return healthy_reply(request)

    result = JolokiaBulkReader(fake_jolokia(reply), timeout_s=2).read(JMX_READS)
    assert len(posts) == 1
    assert result.unreachable is None and result.failures == {}
    assert set(result.values) == {read.key for read in JMX_READS}


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (500, b"oops", "answered HTTP 500"),
        (200, b"<html>not json</html>", "answered invalid JSON"),
        (200, b'{"status": 200}', "not a list"),
    ],
)
def test_a_bad_http_answer_fails_the_whole_read(
    fake_jolokia: Callable[[Reply], str], status: int, body: bytes, reason: str
) -> None:
    url = fake_jolokia(lambda _request: (status, body))
    result = JolokiaBulkReader(url, timeout_s=2).read(JMX_READS)
    assert result.values == {}
    assert result.unreachable is not None and reason in result.unreachable


def test_a_closed_port_fails_fast_with_connection_refused() -> None:
    url = f"http://127.0.0.1:{closed_port()}/jolokia/"
    started = time.monotonic()
    result = JolokiaBulkReader(url, timeout_s=2).read(JMX_READS)
    assert time.monotonic() - started < 1.0
    assert result.unreachable == f"Jolokia at {url} unreachable: connection refused"


def test_a_jvm_that_accepts_but_never_answers_is_given_up_on_after_the_timeout() -> None:
    # A listening socket nobody accepts from: the kernel completes the TCP handshake, as for
    # a SIGSTOPped broker, and the answer never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/jolokia/"
        started = time.monotonic()
        result = JolokiaBulkReader(url, timeout_s=0.5).read(JMX_READS)
        elapsed = time.monotonic() - started
    assert 0.4 < elapsed < 2.0
    assert result.unreachable is not None
    assert url in result.unreachable
    assert "0.5 s" in result.unreachable or "timed out" in result.unreachable


def test_a_url_that_is_not_http_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="must start with http"):
        JolokiaBulkReader("127.0.0.1:8778/jolokia", timeout_s=1)


# -- psutil -------------------------------------------------------------------------------------


def test_host_values_are_read_for_the_log_dir(tmp_path: Path) -> None:
    reading = read_host([str(tmp_path), str(tmp_path)])
    assert reading.errors == ()
    assert reading.cpu_total_s is not None and reading.cpu_busy_s is not None
    assert 0 <= reading.cpu_busy_s <= reading.cpu_total_s
    assert reading.memory_total_bytes is not None and reading.memory_used_bytes is not None
    assert 0 < reading.memory_used_bytes < reading.memory_total_bytes
    assert reading.log_dir_free_bytes is not None and reading.log_dir_free_bytes > 0
    assert reading.log_dir_used_bytes is not None and reading.log_dir_used_bytes > 0
    one_dir = read_host([str(tmp_path)])  # the same filesystem twice counts once
    assert one_dir.log_dir_used_bytes is not None
    assert abs(one_dir.log_dir_used_bytes - reading.log_dir_used_bytes) < 64 * 1024 * 1024
    assert reading.network_bytes_recv is not None and reading.network_bytes_recv >= 0


def test_a_missing_log_dir_is_an_error_for_its_fields_only(tmp_path: Path) -> None:
    reading = read_host([str(tmp_path / "gone")])
    assert (reading.log_dir_used_bytes, reading.log_dir_free_bytes) == (None, None)
    assert reading.memory_total_bytes is not None
    assert [(e.source, e.metric) for e in reading.errors] == [
        ("psutil", "host.log_dir_used_bytes, host.log_dir_free_bytes")
    ]
    assert "gone" in reading.errors[0].message


# -- the collector ------------------------------------------------------------------------------


def test_the_collector_measures_its_interval_and_records_the_configured_one_first(
    fake_jolokia: Callable[[Reply], str], tmp_path: Path
) -> None:
    collector = MetricsCollector(
        "prod",
        2,
        "zone-c",
        fake_jolokia(healthy_reply),
        [str(tmp_path)],
        30.0,
        agent_version="0.1.0",
    )
    first = collector.collect()
    time.sleep(0.2)
    second = collector.collect()
    for sample in (first, second):
        jsonschema.validate(sample.record, SCHEMA)
        assert sample.errors == ()
        assert 0 < sample.collect_s < 2
    assert first.record["interval_s"] == 30.0
    assert 0.2 <= second.record["interval_s"] < 5
    assert second.record["timestamp_ms"] > first.record["timestamp_ms"]
    # the fake's counters stand still: the second collect's rates are counter deltas, 0
    assert first.record["broker"]["bytes_in_per_s"] == 100.0
    assert second.record["broker"]["bytes_in_per_s"] == 0.0


def test_the_collector_refuses_settings_that_cannot_work() -> None:
    with pytest.raises(ValueError, match="interval_s must be positive"):
        MetricsCollector("c", 0, None, "http://127.0.0.1:1/jolokia/", ["/"], 0)
    with pytest.raises(ValueError, match="broker_id must be non-negative"):
        MetricsCollector("c", -1, None, "http://127.0.0.1:1/jolokia/", ["/"], 30)


def test_a_failing_host_reader_still_gives_a_record(fake_jolokia: Callable[[Reply], str]) -> None:
    collector = MetricsCollector(
        "prod",
        2,
        None,
        fake_jolokia(healthy_reply),
        ["/"],
        30.0,
        read_host_values=lambda _dirs: HostReading(),
    )
    sample = collector.collect()
    assert set(sample.record["host"].values()) == {None}
    assert sample.record["broker"]["leader_count"] == 1


# -- statsd -------------------------------------------------------------------------------------


def receive_datagrams(listener: socket.socket, until: Callable[[list[str]], bool]) -> list[str]:
    """Datagrams received until `until(datagrams)` holds, or 5 s passed."""
    datagrams: list[str] = []
    deadline = time.monotonic() + 5
    while not until(datagrams) and time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            datagrams.append(listener.recv(65536).decode())
    return datagrams


def test_gauges_arrive_at_a_statsd_socket_in_few_datagrams() -> None:
    sample: MetricsSample = build(answer(healthy_values()))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.2)
        publisher = MetricsPublisher("127.0.0.1", listener.getsockname()[1], "kaas", None)
        result = publisher.publish(sample)
        datagrams = receive_datagrams(listener, lambda got: "read_errors" in "".join(got))
        publisher.close()
    assert result.problems == () and result.sentence() is None
    assert not result.delivered  # no Kafka configured
    assert result.record_bytes == len(sample.to_json_bytes())
    lines = "\n".join(datagrams).split()
    assert result.gauges_sent == len(lines) == 20 + 8 + 2 * 3 + 1
    assert len(datagrams) <= 6  # a pipeline packs gauges up to 512 bytes per datagram
    assert "kaas.prod.brokers.2.bytes_in_per_s:100.0|g" in lines
    assert "kaas.prod.brokers.2.topics.audit_log.messages_in_per_s:0.4|g" in lines
    assert "kaas.prod.brokers.2.read_errors:0.0|g" in lines


def test_an_unresolvable_statsd_host_is_a_problem_not_an_exception() -> None:
    publisher = MetricsPublisher("statsd.invalid", 8125, "kaas", None)
    result = publisher.publish(build(answer(healthy_values())))
    assert result.gauges_sent == 0
    sentence = result.sentence()
    assert sentence is not None and sentence.startswith(
        "metrics not published: statsd statsd.invalid:8125"
    )


def test_publish_after_close_is_a_programming_error() -> None:
    publisher = MetricsPublisher(None, 8125, "kaas", None)
    assert publisher.close() == 0
    with pytest.raises(RuntimeError, match="after close"):
        publisher.publish(build(answer(healthy_values())))


# -- KRaft: the controller's own Jolokia --------------------------------------------------------


def _reply_for(values: dict[str, object]) -> Reply:
    """A Jolokia that answers the reads it is asked (in their order) from `values`."""

    def reply(request: bytes) -> tuple[int, bytes]:
        by_mbean = {read.mbean: read.key for read in JMX_READS}
        keys = [by_mbean[r["mbean"]] for r in json.loads(request)]
        return 200, json.dumps([ok(key, values[key]) for key in keys]).encode()

    return reply


def test_split_reads_sends_the_controller_mbeans_to_the_controller_on_kraft() -> None:
    broker, controller = split_reads(JMX_READS, kraft=True)
    assert {r.key for r in controller} == {"offline_partitions_count", "active_controller_count"}
    assert not {r.key for r in broker} & {r.key for r in controller}
    assert len(broker) + len(controller) == len(JMX_READS)
    assert split_reads(JMX_READS, kraft=False) == (tuple(JMX_READS), ())


def test_merge_keeps_the_brokers_values_when_the_controller_is_unreachable() -> None:
    broker_reads, controller_reads = split_reads(JMX_READS, kraft=True)
    broker = JmxResult(values={"leader_count": {}}, failures={"isr_shrinks": "x"})
    merged = merge_results(broker, JmxResult.failed("refused"), controller_reads)
    assert merged.values == {"leader_count": {}}
    assert merged.failures == {
        "isr_shrinks": "x",
        "offline_partitions_count": "refused",
        "active_controller_count": "refused",
    }
    both = merge_results(
        JmxResult.failed("broker down"), JmxResult(values={"active_controller_count": {}}), ()
    )
    assert both.unreachable == "broker down" and "active_controller_count" in both.values
    assert len(broker_reads) == len(JMX_READS) - 2


def test_on_kraft_the_collector_reads_the_controller_mbeans_from_the_controller(
    fake_jolokia: Callable[[Reply], str], tmp_path: Path
) -> None:
    broker_values = healthy_values()
    controller_values = {**broker_values, "active_controller_count": {"Value": 1}}
    broker_values = {**broker_values, "active_controller_count": {"Value": 7}}  # never asked
    asked: list[list[str]] = []

    def broker_reply(request: bytes) -> tuple[int, bytes]:
        asked.append([r["mbean"] for r in json.loads(request)])
        return _reply_for(broker_values)(request)

    collector = MetricsCollector(
        "prod",
        2,
        None,
        fake_jolokia(broker_reply),
        [str(tmp_path)],
        30.0,
        controller_jolokia_url=fake_jolokia(_reply_for(controller_values)),
        kraft=True,
    )
    sample = collector.collect()
    assert sample.errors == ()
    assert sample.record["broker"]["active_controller_count"] == 1
    assert sample.record["broker"]["offline_partitions_count"] == 0
    assert not any("KafkaController" in mbean for mbean in asked[0])
    # A KRaft VM without a controller: those two are no data, not errors.
    plain = MetricsCollector(
        "prod", 3, None, fake_jolokia(_reply_for(broker_values)), [str(tmp_path)], 30.0, kraft=True
    )
    sample = plain.collect()
    assert sample.errors == () and sample.record["broker"]["active_controller_count"] is None
