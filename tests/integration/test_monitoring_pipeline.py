"""The local monitoring pipeline on real servers: `kaas up` (agents) starts statsd, carbon and
graphite-web; the agents' gauges reach Graphite's render API; the dashboard of `kaas serve`
shows them in a real headless browser; `kaas down` stops it."""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from management_plane.local.processes import is_alive
from management_plane.monitoring.graphite import GraphiteReader
from management_plane.monitoring.pipeline import pipeline_records, plan_pipeline
from management_plane.monitoring.rules import load_rules
from management_plane.monitoring.series import rule_values
from management_plane.service.tls import service_identity
from planner.contracts.log_record import (
    LOGS_TOPIC,
    LogErrorClass,
    LogProcess,
    LogRecord,
    parse_log_record,
)
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import parse_spec
from planner.pki.tls import client_context
from tests import harness
from tests.browser import console_errors, headless_chromium
from tests.harness import ClusterHandle
from tests.mp_service import ServiceHandle, free_port

pytestmark = pytest.mark.integration

METRICS_INTERVAL_S = 10  # the local agents' metrics_interval_s (management_plane/local/render.py)
PROBES = 30  # requests naming no API sent to one broker: each makes it log an ERROR or two; a
# start-up minute logs up to ~16 (fetchers meeting leaders not up yet)


def _series(graphite_url: str, target: str, since: str = "-5min") -> dict[str, list[float]]:
    query = urllib.parse.urlencode({"target": target, "format": "json", "from": since})
    with urllib.request.urlopen(f"{graphite_url}/render?{query}", timeout=10) as answer:
        value = json.load(answer)
    return {s["target"]: [p[0] for p in s["datapoints"] if p[0] is not None] for s in value}


def _dashboard_in_browser(handle: ClusterHandle, work: Path) -> None:
    """Sign in to the dashboard of a `kaas serve` managing the cluster, and wait until it shows
    the three brokers and a chart drawn from Graphite's data; the console stays clean."""
    service = ServiceHandle(
        work / "service",
        free_port(),
        harness.FRESH_CLUSTER_BASE,
        extra_args=("--adopt-local-cluster", str(handle.home), "--broker-loss-after", "0"),
    )
    started = time.monotonic()
    service.start()
    print(f"kaas serve answering: {time.monotonic() - started:.1f}s")
    try:
        with headless_chromium(
            work / "browser", service_identity(service.home).certificate
        ) as browser:
            browser.get(f"{service.url}/dashboard/login")
            browser.find_element(By.ID, "api_key").send_keys(service.key)
            browser.find_element(By.ID, "sign_in").click()
            WebDriverWait(browser, 30).until(lambda b: b.current_url.endswith("/dashboard"))
            browser.get(f"{service.url}/dashboard?cluster={handle.layout.name}")

            def shown(b: object) -> bool:
                rows = browser.find_elements(By.CSS_SELECTOR, "#brokers tr.broker")
                lines = browser.find_elements(By.CSS_SELECTOR, "#chart-0 polyline.series")
                return len(rows) == 3 and any(
                    int(line.get_attribute("data-points") or 0) >= 2 for line in lines
                )

            WebDriverWait(browser, 90, poll_frequency=1).until(shown)
            print(f"dashboard shows the brokers and a chart: {time.monotonic() - started:.1f}s")
            rows = browser.find_elements(By.CSS_SELECTOR, "#brokers tr.broker")
            assert [r.get_attribute("data-broker-id") for r in rows] == ["0", "1", "2"]
            assert all("healthy" in r.text for r in rows), [r.text for r in rows]
            # Kept beside the build, where docs/dashboard.png was taken from.
            shot = Path(__file__).resolve().parents[2] / "build" / "dashboard.png"
            shot.parent.mkdir(exist_ok=True)
            browser.save_screenshot(str(shot))
            print(f"dashboard screenshot: {shot}")
            assert console_errors(browser) == []
    finally:
        service.stop()


def _a_broker_error_reaches_the_logs_topic_and_graphite(
    handle: ClusterHandle, graphite_url: str
) -> None:
    """A request whose header names no API makes vm1's broker log an ERROR with its stack
    trace (kafka.network.Processor); vm1's agent streams it to _kaas_logs and counts it.
    Sent PROBES times, so the rate Graphite shows is the probes', not a start-up error's."""
    vm = handle.layout.vms[0]
    target = f"kaas.{handle.layout.name}.brokers.*.logs.errors_per_minute"
    graphite = GraphiteReader(graphite_url)
    before = {
        name: [v for v, _ in points]
        for name, points in graphite.timed_series(target, "-2min").items()
    }
    print(f"errors per minute before the probes: {before}")
    sent, sent_at = time.monotonic(), time.time()
    context = client_context(handle.admin_identity)
    for _ in range(PROBES):
        with (
            socket.create_connection((vm.address, vm.ports.kafka_internal), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=vm.address) as tls,
        ):
            header = struct.pack(">hhi", 32000, 0, 7) + b"\x00\x00"  # api key 32000, no client id
            tls.sendall(struct.pack(">i", len(header)) + header)
            assert tls.recv(64) == b""  # the broker closes the connection
    consumer = Consumer(
        handle.client_config(**{"group.id": "log-check", "auto.offset.reset": "earliest"})
    )
    found: LogRecord | None = None
    try:
        consumer.subscribe([LOGS_TOPIC])
        while found is None and time.monotonic() - sent < 60:
            message = consumer.poll(1)
            if message is None or message.error():
                continue
            record = parse_log_record(message.value() or b"")
            if message.key() == f"{vm.name}/kafka".encode() and "InvalidRequest" in record.message:
                found = record
    finally:
        consumer.close()
    assert found is not None, "no ERROR entry of vm1's broker in _kaas_logs within 60 s"
    assert (found.process, found.error_class, found.level) == (
        LogProcess.KAFKA,
        LogErrorClass.ERROR,
        "ERROR",
    )
    assert found.lines > 1 and "\tat " in found.message  # the stack trace joined its entry
    print(f"broker ERROR in _kaas_logs: {time.monotonic() - sent:.1f}s")

    def counted() -> bool:
        """A point taken after the probes counts them all (each logs at least one ERROR)."""
        rates = graphite.timed_series(target, "-2min")
        return any(
            value is not None and value >= PROBES and at >= sent_at  # a bucket after the probes
            for points in rates.values()
            for value, at in points
        )

    while time.monotonic() - sent < 60 + 3 * METRICS_INTERVAL_S and not counted():
        time.sleep(1)
    assert counted(), graphite.timed_series(target, "-2min")
    print(f"errors per minute in Graphite: {time.monotonic() - sent:.1f}s")


def test_graphite_holds_every_brokers_under_replicated_series_soon_after_up(
    fresh_cluster_with_agents: ClusterHandle, tmp_path: Path
) -> None:
    up_done = time.monotonic()
    handle = fresh_cluster_with_agents
    layout = plan_pipeline(handle.home, handle.layout.vms[0].address.rsplit(".", 1)[0])
    cluster = handle.layout.name

    # The agents send where the spec says, not where their settings point.
    zk = handle.zookeeper()
    zk.start(timeout=30)
    try:
        raw, _ = zk.get(ClusterPaths(cluster).spec)
    finally:
        zk.stop()
        zk.close()
    monitoring = parse_spec(raw).monitoring
    assert monitoring is not None
    assert (monitoring.statsd_host, monitoring.statsd_port) == (layout.host.address, 8125)
    assert monitoring.graphite_url == layout.graphite_url

    target = f"kaas.{cluster}.brokers.*.under_replicated_partitions"
    expected = {f"kaas.{cluster}.brokers.{i}.under_replicated_partitions" for i in range(3)}
    deadline = up_done + 2 * METRICS_INTERVAL_S
    seen: dict[str, list[float]] = {}
    while time.monotonic() < deadline:
        seen = _series(layout.graphite_url, target)
        if expected <= {name for name, points in seen.items() if points}:
            break
        time.sleep(1)
    assert expected <= {name for name, points in seen.items() if points}, seen
    print(f"every broker's URP series in Graphite {time.monotonic() - up_done:.1f}s after up")
    for name in expected:
        assert all(value == 0 for value in seen[name]), (name, seen[name])

    # Beside the record: each VM's ZooKeeper server (mntr over TLS) and the agent's own.
    own = {
        f"kaas.{cluster}.brokers.{i}.{name}"
        for i in range(3)
        for name in ("zookeeper.up", "zookeeper.avg_latency_ms", "agent.cycles")
    }
    deadline = time.monotonic() + 3 * METRICS_INTERVAL_S
    while time.monotonic() < deadline:
        seen = _series(layout.graphite_url, f"kaas.{cluster}.brokers.*.{{zookeeper,agent}}.*")
        if own <= {name for name, points in seen.items() if points}:
            break
        time.sleep(1)
    assert own <= {name for name, points in seen.items() if points}, sorted(seen)
    roles = _series(layout.graphite_url, f"kaas.{cluster}.brokers.*.zookeeper.is_leader")
    assert sum(points[-1] for points in roles.values() if points) == 1, roles

    # The shipped cluster rules over the real render API, read at every phase of the agents'
    # reports for one interval: one active controller each time, nothing under-replicated
    # (a sum of the newest timestamp's points said 0 controllers whenever the controller's
    # agent had not reported into it yet).
    rules = {r.name: r for r in load_rules().rules}
    graphite = GraphiteReader(layout.graphite_url)
    for _ in range(METRICS_INTERVAL_S):
        for rule, expected_value in (
            ("active_controllers", 1.0),
            ("under_replicated_partitions", 0.0),
        ):
            series = graphite.timed_series(rules[rule].target_for(cluster), "-60s")
            assert rule_values(rules[rule], series) == {"cluster": expected_value}, (rule, series)
        time.sleep(1)

    # Metric delay: one gauge sent now, until the render API shows it.
    probe = f"kaas.{cluster}.probe.delay"
    sent = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.sendto(f"{probe}:42|g".encode(), (layout.host.address, layout.host.statsd_port))
    while time.monotonic() - sent < 3 * METRICS_INTERVAL_S:
        if _series(layout.graphite_url, probe, "-2min").get(probe):
            break
        time.sleep(0.5)
    assert _series(layout.graphite_url, probe, "-2min").get(probe) == [42.0]
    print(f"metric delay (statsd to render API): {time.monotonic() - sent:.1f}s")

    _a_broker_error_reaches_the_logs_topic_and_graphite(handle, layout.graphite_url)

    started = time.monotonic()
    _dashboard_in_browser(handle, tmp_path)
    print(f"dashboard in a headless browser: {time.monotonic() - started:.1f}s")

    records = pipeline_records(layout)
    assert len(records) == 3 and all(is_alive(r) for r in records.values())
    handle.local.down()
    assert not any(is_alive(r) for r in records.values())
    assert pipeline_records(layout) == {}
